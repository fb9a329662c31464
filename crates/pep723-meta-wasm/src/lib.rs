//! WASM bindings (wasm-bindgen) of pep723-meta for editors
