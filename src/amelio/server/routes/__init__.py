"""One router per area; each route parses, calls one library function, serializes."""
