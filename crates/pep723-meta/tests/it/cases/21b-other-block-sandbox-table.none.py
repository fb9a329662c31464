# /// config
# [tool.python-sandbox]
# net = "off"
# ///

# /// settings
# tool.python-sandbox.net = "off"
# [ tool . "python-sandbox" . extra ]
# ///
