# /// script
# [tool.python-sandbox]
# engine = "k8s"
# namespace = "team-a"
# context = "kind-python-sandbox"
# preview-domain = "preview.example.com"
# ingress-class = "nginx"
# preview = "ingress"
# sync-limit = "1GiB"
# ///
