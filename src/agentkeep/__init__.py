"""agentkeep: a durable agent runtime for Python."""
