"""The MCP face: Amelio's loop as tools, resources and a prompt."""
