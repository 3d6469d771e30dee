"""The memstream contract: event models, topic registry, client, local broker and topic admin. No faust here."""
