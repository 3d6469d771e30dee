"""How records are consumed: stage plumbing, the request lane, turns, commits, priorities."""
