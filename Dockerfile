# The gpucarve image: the package installed from its wheel, run as a non-root user with a
# read-only root filesystem (the Helm chart mounts /tmp and the policy). Build and push it
# to a registry your cluster's nodes can pull from:
#   docker build -t REGISTRY/gpucarve:0.1.0 .
#   helm install gpucarve deploy/helm/gpucarve --set image.repository=REGISTRY/gpucarve ...
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# the package and every dependency as wheels, so the final stage installs offline
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin gpucarve
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels gpucarve \
    && rm -rf /wheels
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
USER 10001:10001
ENTRYPOINT ["gpucarve"]
CMD ["--help"]
