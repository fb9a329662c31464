# /// script
# dependencies = []
#
# [tool.python-sandbox]
# image = "registry.example/psbx:1"
# runtime-class = "gvisor"
# ///
print("hi")
