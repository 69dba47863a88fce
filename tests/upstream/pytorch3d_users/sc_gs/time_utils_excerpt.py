"""SC-GS (yihua7/SC-GS @ 26cd57d, MIT, see LICENSE): its pytorch3d point-op lines, from utils/time_utils.py.

Every line not marked ``# added`` is upstream's, verbatim: lines 2 and 5 (imports); lines 934-967
(``ControlNodeWarp.cal_nn_weight``) dedented by 4, so the method is a function of ``self``; lines 1051-1052
and 1061-1062 (``p2dR``'s trajectory and node KNN) dedented by 8 inside the marked wrappers.  CRLF line
endings became LF.  Run by ``drive_users.py`` through pcgeom's shims (``import pytorch3d.ops`` is served).
"""  # added
import torch
import pytorch3d.ops


def cal_nn_weight(self, x:torch.Tensor, K=None, feature=None, nodes=None, gs_kernel=True, temperature=1.):
    if self.skinning:
        nn_weight = torch.softmax(feature, dim=-1)
        nn_idx = torch.arange(0, self.node_num, dtype=torch.long).cuda()
        return nn_weight, None, nn_idx
    else:
        if self.cached_nn_weight and self.nn_weight is not None:
            return self.nn_weight, self.nn_dist, self.nn_idxs
        else:
            if self.hyper_dim > 0 and feature is not None:
                x = torch.cat([x.detach(), feature[..., :self.hyper_dim]], dim=-1)  # cat with hyper coor
            K = self.K if K is None else K
            # Weights of control nodes
            nodes = self.nodes[..., :3].detach() if nodes is None else nodes[..., :3]
            if feature is not None:
                nodes = torch.cat([nodes[..., :3].detach(), self.nodes[..., 3:]], dim=-1)  # Freeze the first 3 coordinates for deformation mlp input
            nn_dist, nn_idxs, _ = pytorch3d.ops.knn_points(x[None], nodes[None], None, None, K=K)  # N, K
            nn_dist, nn_idxs = nn_dist[0], nn_idxs[0]  # N, K
            if gs_kernel:
                nn_radius = self.node_radius[nn_idxs]  # N, K
                nn_weight = torch.exp(- nn_dist / (2 * nn_radius ** 2))  # N, K
                if self.with_node_weight:
                    nn_node_weight = self.node_weight[nn_idxs]
                    nn_weight = nn_weight * nn_node_weight[..., 0]
                nn_weight = nn_weight + 1e-7
                nn_weight = nn_weight / nn_weight.sum(dim=-1, keepdim=True)  # N, K
                if self.cached_nn_weight:
                    self.nn_weight = nn_weight
                    self.nn_dist = nn_dist
                    self.nn_idxs = nn_idxs
                return nn_weight, nn_dist, nn_idxs
            else:
                nn_weight = torch.softmax(- nn_dist / temperature, dim=-1)
                return nn_weight, nn_dist, nn_idxs


def p2dR_trajectory_knn(trajectory, K):  # added
    nn_dist, nn_idx, _ = pytorch3d.ops.knn_points(trajectory[None], trajectory[None], None, None, K=K+1, return_nn=False)
    nn_dist, nn_idx = nn_dist[0, :, 1:], nn_idx[0, :, 1:]
    return nn_dist, nn_idx  # added


def p2dR_node_knn(nodes, K):  # added
    nn_dist, nn_idx, nn_nodes = pytorch3d.ops.knn_points(nodes[None], nodes[None], None, None, K=K+1, return_nn=True)
    nn_dist, nn_idx, nn_nodes = nn_dist[0, :, 1:], nn_idx[0, :, 1:], nn_nodes[0, :, 1:]
    return nn_dist, nn_idx, nn_nodes  # added
