"""The skill loop's online path: respond(), the prompt, learnings, quality metrics
and answer feedback."""
