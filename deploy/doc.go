// Package deploy holds inboxd's deployment files (the Kubernetes manifests in
// kubernetes/, the systemd unit and its companions in systemd/, the Dockerfile
// and the Prometheus rules) and the tests that check them: the manifests
// decode strictly against the Kubernetes API types, their pods pass the Pod
// Security "restricted" level, the image reference, port and shutdown timing
// agree across the files, and systemd-analyze accepts the unit.
package deploy
