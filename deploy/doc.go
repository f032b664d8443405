// Package deploy holds what runs kube-ipvs in a cluster: the manifests (kubectl apply -k
// deploy/); the image is built by hack/image (make image). It has no code; its tests check that every manifest
// decodes into the right Kubernetes type with no unknown field, and that the DaemonSet and
// RBAC keep the properties a node proxy needs.
package deploy
