//! Spec-exact PEP 723 inline script metadata: parsing, diagnostics and round-trip editing
