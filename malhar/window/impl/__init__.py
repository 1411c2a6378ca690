"""The implementations: the operators, their unifier, the in-memory storage, the watermark
generator, and the shared core (:mod:`malhar.window.impl.core`)."""
