"""Where and who: the workspace folder, its settings, discovery, projects and API keys."""
