"""Built-in variants; each module registers its variants on import."""
