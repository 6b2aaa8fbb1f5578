//! A cluster shaped as sig-scalability's thresholds shape one, at any number of nodes: the
//! objects the bench's `fleet` scenario starts from.
//!
//! Per node, as the thresholds have it at 5,000 nodes (150,000 pods, 10,000 services): 30 pods
//! and 2 Services (each with its EndpointSlice), one namespace per 50 nodes, ConfigMaps and
//! Secrets beside them. Each Service selects one Deployment of 15 replicas, spread over 15
//! nodes by the round-robin scheduler; a DaemonSet adds a pod on every node. Nodes report 40
//! images, as nodes of a busy cluster do (about 10 KB of JSON each), and pods carry the
//! managedFields their creator and kubelet wrote, as pods read from a real apiserver do.
//!
//! Built by [`demo_cluster`] from a [`DemoSpec`] of that shape: the same objects the demo and
//! the other scenarios are made of, at the thresholds' proportions.

use super::{demo_cluster, DemoSpec, SeedObject};

/// Nodes per namespace (the thresholds' 5,000 nodes in 100 namespaces).
const NODES_PER_NAMESPACE: usize = 50;
/// Replicas of each Deployment: with two Services (two Deployments) per node, 30 pods a node.
const REPLICAS: usize = 15;
/// Images a node reports beyond the four [`demo_cluster`]'s nodes have.
const EXTRA_NODE_IMAGES: usize = 36;

/// The size of a [`fleet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetSpec {
    /// Nodes, named `node-1` .. `node-N`.
    pub nodes: usize,
    /// Seed of the random generator; equal seeds give equal clusters.
    pub seed: u64,
}

/// A cluster of `spec.nodes` nodes at the thresholds' proportions, in creation order (see
/// the module's docs).
pub fn fleet(spec: &FleetSpec) -> Vec<SeedObject> {
    let nodes_per_namespace = spec.nodes.clamp(1, NODES_PER_NAMESPACE);
    let services = 2 * nodes_per_namespace;
    demo_cluster(&DemoSpec {
        namespaces: spec.nodes.div_ceil(NODES_PER_NAMESPACE).max(1),
        nodes: spec.nodes,
        deployments_per_namespace: services,
        replicas: REPLICAS,
        // An application's configuration beside each Deployment, and the namespace's
        // kube-root-ca.crt; a Secret for every other Deployment.
        configmaps_per_namespace: services + 1,
        secrets_per_namespace: services / 2,
        services_per_namespace: services,
        node_images: EXTRA_NODE_IMAGES,
        pod_managed_fields: true,
        seed: spec.seed,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    fn of<'a>(objs: &'a [SeedObject], resource: &str) -> Vec<&'a SeedObject> {
        objs.iter().filter(|o| o.resource == resource).collect()
    }

    fn json_len(o: &SeedObject) -> usize {
        serde_json::to_vec(&o.object).unwrap().len()
    }

    #[test]
    fn a_hundred_nodes_at_the_thresholds_proportions() {
        let objs = fleet(&FleetSpec {
            nodes: 100,
            seed: 1,
        });
        let nodes = of(&objs, "nodes");
        let node_names: BTreeSet<&str> = nodes.iter().map(|n| n.name()).collect();
        assert_eq!(node_names.len(), 100);
        assert_eq!(of(&objs, "namespaces").len(), 2);
        // About 10 KB a node, most of it the images it reports.
        for n in &nodes {
            let len = json_len(n);
            assert!((8_000..14_000).contains(&len), "{}: {len} bytes", n.name());
            assert_eq!(n.object["status"]["images"].as_array().unwrap().len(), 40);
        }
        // 30 pods a node from the Deployments, one more from the DaemonSet, a few others
        // (a Job's, a StatefulSet's) placed in turn.
        let pods = of(&objs, "pods");
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &pods {
            let node = p.object["spec"]["nodeName"]
                .as_str()
                .expect("every pod is scheduled");
            assert!(node_names.contains(node), "{node}");
            *per_node.entry(node).or_default() += 1;
        }
        assert_eq!(per_node.len(), 100);
        assert!(
            per_node.values().all(|n| (31..=33).contains(n)),
            "{per_node:?}"
        );
        // Pods as a real apiserver returns them: managedFields, status with conditions.
        let deployed: Vec<_> = pods
            .iter()
            .filter(|p| p.object["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet")
            .collect();
        assert_eq!(deployed.len(), 3_000);
        for p in &deployed {
            assert!(
                p.object["metadata"]["managedFields"]
                    .as_array()
                    .unwrap()
                    .len()
                    >= 2
            );
            assert!(!p.object["status"]["conditions"]
                .as_array()
                .unwrap()
                .is_empty());
        }
        // Two Services a node, each with its EndpointSlice of 15 ready endpoints on 15 nodes.
        let services: Vec<_> = of(&objs, "services")
            .into_iter()
            .filter(|s| s.object["spec"]["type"] == "ClusterIP" && s.name() != "postgres")
            .collect();
        assert_eq!(services.len(), 200);
        let slices = of(&objs, "endpointslices");
        for s in &services {
            let slice = slices
                .iter()
                .find(|e| {
                    e.namespace() == s.namespace()
                        && e.object["metadata"]["labels"]["kubernetes.io/service-name"] == s.name()
                })
                .unwrap_or_else(|| panic!("no EndpointSlice for {}", s.name()));
            let endpoints = slice.object["endpoints"].as_array().unwrap();
            assert_eq!(endpoints.len(), REPLICAS);
            let on: BTreeSet<&str> = endpoints
                .iter()
                .map(|e| e["nodeName"].as_str().unwrap())
                .collect();
            assert_eq!(on.len(), REPLICAS, "{}", s.name());
        }
        assert!(of(&objs, "configmaps").len() >= 200);
        assert!(of(&objs, "secrets").len() >= 100);
    }

    #[test]
    fn fewer_nodes_than_a_namespace_holds_keep_the_proportions() {
        let objs = fleet(&FleetSpec { nodes: 4, seed: 2 });
        assert_eq!(of(&objs, "nodes").len(), 4);
        assert_eq!(of(&objs, "namespaces").len(), 1);
        let deployed = of(&objs, "pods")
            .into_iter()
            .filter(|p| p.object["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet")
            .count();
        assert_eq!(deployed, 4 * 30);
    }
}
