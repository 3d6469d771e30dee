"""The log's older records in segment files beside the embedded broker (tiered storage)."""
