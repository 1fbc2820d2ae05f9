"""The web dashboard: server-rendered pages, no build step, nothing from a CDN."""
