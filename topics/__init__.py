"""The memstream contract: event models, topic registry, client, local broker, topic admin.

No faust here, so any producer can depend on it.
"""
