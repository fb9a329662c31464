//! Runs PEP 723 scripts in Docker or Podman containers through the Docker Engine API
