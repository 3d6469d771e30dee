"""The memstream contract: event models, the topic registry, the value format and the settings
the contract needs. It imports nothing else of memstream, so any producer can depend on it."""
