"""Environments execute actions; `environment_for` picks the task's. Each concern has its module:
environment (base tools, MCP, attachments), general, cloud_pages (cloud mode), browsing (browser tools and the
page view), browser_modes (start-up of each browser mode and session acquisition)."""
from .browser_modes import ClientBrowserEnvironment, CloudBrowserEnvironment, KeptSessionEnvironment, task_policy
from .browsing import BrowserEnvironment
from .cloud_pages import HttpPageEnvironment
from .environment import Environment
from .general import GeneralEnvironment

__all__ = ["BROWSER_ENVIRONMENTS", "BrowserEnvironment", "ClientBrowserEnvironment", "CloudBrowserEnvironment",
           "Environment", "GeneralEnvironment", "HttpPageEnvironment", "KeptSessionEnvironment", "environment_for"]

# executionMode → browser environment class for the web agent; the browser issues register theirs here.
BROWSER_ENVIRONMENTS = {"cloud_browser": CloudBrowserEnvironment, "client": ClientBrowserEnvironment}


def environment_for(task, should_stop, config):
    if task.agent != "web":
        return GeneralEnvironment(task, should_stop)
    if task.cloud_session_id:
        return KeptSessionEnvironment(task, should_stop, config)
    if task.execution_mode == "cloud":
        return HttpPageEnvironment(task, should_stop, policy=task_policy(task, config),
                                   timeout=config["FETCH_TIMEOUT_SECONDS"])
    browser = BROWSER_ENVIRONMENTS.get(task.execution_mode)
    if browser is None:
        raise ValueError(f"The web agent has no '{task.execution_mode}' browser in this deployment yet; "
                         "use executionMode 'cloud' to read pages without a browser.")
    return browser(task, should_stop, config)
