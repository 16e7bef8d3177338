"""Task-pool adaptation: which tasks to rewrite, and which rewrites to keep."""
