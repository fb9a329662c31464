# /// script
# ///
print("hi")
