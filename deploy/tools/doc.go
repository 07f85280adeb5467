// Package tools tests idem's deployment files as their users run them: the Helm chart in
// deploy/helm/idem (helm lint, helm template, the rendered manifests checked against the
// Kubernetes schemas, its gateway configuration loaded by the gateway itself), the Prometheus
// alert rules in deploy/prometheus and their runbook, the systemd unit in deploy/systemd, and
// every block of docs/deploy.md.
//
// It is a module of its own, so that Helm and the Kubernetes libraries stay out of the
// dependencies of idem's users. Run it with make deploy-test.
package tools
