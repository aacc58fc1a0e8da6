"""The view room: Kubernetes objects in, core values out, with no client, thread or clock (an
import-linter contract says so), so every translation is tested without a server."""
