"""Agent prefixes: the SDK starts a prompt with `/Operator`, `/OperatorMini`, `/coreAgent` or
`/CoreAgentMini` to choose the agent. The prefix chooses, then is gone: planners never see it."""
import re

# Mini variants choose the same agent as their full one. A prefix counts only as a whole word:
# "/Operators ..." or "/OperatorX" is an ordinary prompt for the general agent.
PREFIXES = {"/Operator": "web", "/OperatorMini": "web", "/coreAgent": "general", "/CoreAgentMini": "general"}
_PREFIX = re.compile(r"^\s*(?P<prefix>/OperatorMini|/Operator|/CoreAgentMini|/coreAgent)(?=\s|$)")
DEFAULT_AGENT = "general"


def split_prefix(prompt):
    """Return (agent, prompt without its prefix). No prefix: the general agent, prompt unchanged
    (but for surrounding whitespace)."""
    match = _PREFIX.match(prompt)
    if match is None:
        return DEFAULT_AGENT, prompt.strip()
    return PREFIXES[match["prefix"]], prompt[match.end():].strip()


def agent_for(prompt):
    return split_prefix(prompt)[0]
