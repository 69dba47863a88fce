# Excerpt of Pang-Yatian/Point-MAE tools/runner_finetune.py @ 7445a68 (MIT, see ../LICENSE).
# Lines 9 and 11 (module-level imports) and lines 127-143 (the training-time sampling, dedented by 4) verbatim;
# the lines marked "added" wrap them in a function so a test can call them (the rest of
# the runner needs datasets, torchvision and a config system).
import numpy as np
from pointnet2_ops import pointnet2_utils


def sample_train_points(points, npoints):  # added
    if True:  # added: keeps the original indentation of the loop body
        if npoints == 1024:
            point_all = 1200
        elif npoints == 2048:
            point_all = 2400
        elif npoints == 4096:
            point_all = 4800
        elif npoints == 8192:
            point_all = 8192
        else:
            raise NotImplementedError()

        if points.size(1) < point_all:
            point_all = points.size(1)

        fps_idx = pointnet2_utils.furthest_point_sample(points, point_all)  # (B, npoint)
        fps_idx = fps_idx[:, np.random.choice(point_all, npoints, False)]
        points = pointnet2_utils.gather_operation(points.transpose(1, 2).contiguous(), fps_idx).transpose(1, 2).contiguous()  # (B, N, 3)
        return points  # added
