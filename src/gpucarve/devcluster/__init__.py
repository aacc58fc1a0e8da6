"""The local etcd, kube-apiserver and kwok stack `gpucarve dev-cluster` and the integration
tests start, from binaries `tools/testenv.sh` builds."""
