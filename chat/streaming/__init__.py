"""The event streams of a streamed request: buffered (whole reply), relayed (Redis deltas) and their pacing."""
