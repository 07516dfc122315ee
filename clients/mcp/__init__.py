"""`brain-mcp`: the stdio MCP proxy that forwards an agent's tool calls to gRPC."""
