"""Improving skills from their own use: proposals, approval and writing the new version."""
