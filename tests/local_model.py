"""The real local model (config/local_model.py) for tests: llama.cpp's server on a free loopback port,
behind a recording reverse proxy that keeps every request it forwarded and the status it got back."""
import requests

from bench.model_proxy import RecordingProxy
from config.local_model import MODEL, SLOTS, server_argv, server_env
from tests.processes import ManagedProcess, free_port


class LocalModel:
    def __init__(self):
        self.port = free_port()
        self.server = ManagedProcess(server_argv(self.port), "llama-server", server_env(self.port))
        self.server.wait_until(self._ready, timeout=180)
        self._proxy = RecordingProxy(f"http://127.0.0.1:{self.port}", timeout=600)

    def _ready(self):
        try:
            return requests.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=2).ok
        except requests.RequestException:
            return False

    @property
    def base_url(self):
        return self._proxy.base_url + "/v1"

    @property
    def exchanges(self):
        """{"path", "raw", "status", "response"} of every request, in order."""
        return self._proxy.exchanges

    def env(self, **extra):
        """Environment for a worker process that plans with this model (through the proxy)."""
        return {"LLM_BASE_URL": self.base_url, "LLM_API_KEY": "", "LLM_MODEL": MODEL, "LLM_CONCURRENCY": str(SLOTS),
                **{key: str(value) for key, value in extra.items()}}

    def clear(self):
        self._proxy.clear()

    def recorded(self):
        return self._proxy.recorded()

    def close(self):
        self._proxy.close()
        self.server.stop()
