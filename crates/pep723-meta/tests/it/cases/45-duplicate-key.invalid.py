# /// script
# dependencies = ["rich"]
# dependencies = ["httpx"]
# ///
