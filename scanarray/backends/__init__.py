"""Backend implementations; each is imported only when a call chooses it."""
