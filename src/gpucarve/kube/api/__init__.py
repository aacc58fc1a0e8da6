"""The API room: the client (kubeconfig, in-cluster, exec plugins), informers, leader election,
Events and the CRDs the package ships. Knows nothing of policies or workloads."""
