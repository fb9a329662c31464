# /// script
# dependencies = ["rÿich"]
# ///
