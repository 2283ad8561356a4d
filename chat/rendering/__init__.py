"""A native status -> the replies of each API: completions, chunks, Responses events and SSE framing (pure)."""
