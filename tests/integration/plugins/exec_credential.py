"""A small exec credential plugin, as cloud providers ship them (aws eks get-token, gke-gcloud-
auth-plugin, kubelogin): prints an ExecCredential with a bearer token.

    exec_credential.py API_VERSION TOKEN_FILE COUNTER_FILE LIFETIME_S [fail]

Each run appends a line to COUNTER_FILE; `fail` makes it fail as an expired login does.
"""

import datetime
import json
import sys

api_version, token_file, counter, lifetime = sys.argv[1:5]
with open(counter, "a") as f:
    f.write("run\n")
if sys.argv[5:] == ["fail"]:
    sys.stderr.write("error: the SSO session has expired; run `cloud login`\n")
    sys.exit(1)
expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=float(lifetime))
with open(token_file) as f:
    status = {"token": f.read().strip()}
status["expirationTimestamp"] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "status": status}))
