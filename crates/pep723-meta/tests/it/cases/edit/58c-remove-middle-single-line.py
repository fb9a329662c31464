# /// script
# dependencies = ["anyio", "httpx", "rich"]
# ///
