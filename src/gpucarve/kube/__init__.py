"""The only package that talks to Kubernetes: `api` (the client and its plumbing), `view`
(objects in, core values out; pure) and `scheduler` (the loop and its actions), as
docs/architecture.md maps them."""
