"""Conflicts between memories and consolidation of restatements (issue 30)."""
