"""The context router: lexical parts, the learned index, the router and the routing examples."""
