"""The service as an MCP server: its tools (tools.py), the JSON-RPC protocol (protocol.py), Streamable HTTP at /mcp
(routes.py) and stdio (`remote-dispatch mcp`, stdio.py). Every tool is a call of the REST API with the caller's key
(rest.py), so an MCP caller meets the same validation, rate limits, plan limits and ownership as a REST one."""
