# /// script
# dependencies = ["anyio", "Rich>=12"]
# ///
