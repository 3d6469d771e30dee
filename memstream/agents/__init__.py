"""Where agents meet memstream: an MCP server (``memstream mcp``) and a LangGraph store.

Both are thin layers over ``MemoryClient``; their third-party SDKs are optional extras
(``memstream[mcp]``, ``memstream[langgraph]``) and are imported only by the modules that
need them.
"""
