"""A kubelet PodResources server of the tests' own: the published API (the generated
servicer of agent/podresources/) served with grpcio on a Unix socket, answering `List` with
the pods and devices a test sets."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from gpucarve.agent.podresources import api_pb2, api_pb2_grpc

Pods = list[tuple[str, str, str, list[str]]]  # namespace, name, resource, device ids


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self) -> None:
        self.pods: Pods = []
        self.calls = 0

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: Any
    ) -> api_pb2.ListPodResourcesResponse:
        self.calls += 1
        reply = api_pb2.ListPodResourcesResponse()
        for ns, name, resource, ids in self.pods:
            pod = reply.pod_resources.add(name=name, namespace=ns)
            container = pod.containers.add(name="main")
            container.devices.add(resource_name=resource, device_ids=ids)
            container.cpu_ids.extend([0, 1])  # what else a kubelet reports: ignored
        return reply


class PodResourcesServer:
    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.lister = _Lister()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self.lister, self.server)
        self.server.add_insecure_port(f"unix://{socket}")

    @property
    def pods(self) -> Pods:
        return self.lister.pods

    @pods.setter
    def pods(self, value: Pods) -> None:
        self.lister.pods = value

    def __enter__(self) -> PodResourcesServer:
        self.server.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.stop(grace=None)
