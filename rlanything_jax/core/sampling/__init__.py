"""Text generation with the decoder."""
