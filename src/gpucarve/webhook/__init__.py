"""The admission webhook: the server (`server`), its decisions (`admission`, and `bypass` for
the ways around the queue) and its certificate (`certs`, `cert_secret`)."""
