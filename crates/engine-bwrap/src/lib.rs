//! Runs PEP 723 scripts with the host uv inside bubblewrap
