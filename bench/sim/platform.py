#!/usr/bin/env python3
"""Writes a SimGrid platform (XML) and hostfile for one simulated run of P ranks.

  platform.py KIND P OUTDIR      prints OUTDIR/KIND-P.xml and OUTDIR/KIND-P.hosts

KIND:
  shm2   calibration: one host, 2 cores; the ranks talk through its loopback link, which stands for
         Open MPI's shared-memory path (SHM_LAT, SHM_BW)
  ft1    fat tree, 1 rank per node: leaves of 32 hosts, radix-64 switches, full bisection (1 level
         up to 32 nodes, 2 up to 2048, 3 above)
  ft8    the same fat tree with 8 ranks per node (P/8 nodes); ranks of a node share its loopback
  df1    dragonfly, 1 rank per node: 8 nodes per router, 16 routers per chassis, 4 chassis per
         group, 2 links between groups

Every network link: LINK_BW (default 100 Gb/s = 12.5 GBps) and LINK_LAT per hop (0.25 us: a host
reaches a host on its own leaf in 2 hops; o_s + 2 hops + o_r ~ 1 us with the default software
overheads of simulate.sh). Environment: LINK_BW, LINK_LAT, SHM_BW, SHM_LAT.
"""
import os
import sys

LINK_BW = os.environ.get("LINK_BW", "12.5GBps")
LINK_LAT = os.environ.get("LINK_LAT", "0.25us")
SHM_BW = os.environ.get("SHM_BW", "10GBps")
SHM_LAT = os.environ.get("SHM_LAT", "0.12us")
SPEED = "1Gf"  # = smpi/host-speed in simulate.sh, so that smpi_execute(t) lasts t


def fat_tree(nodes):
    """SimGrid FAT_TREE (XGFT) parameters."""
    if nodes <= 32:
        return "1;%d;1;1" % nodes
    if nodes <= 2048:
        return "2;32,%d;1,32;1,1" % ((nodes + 31) // 32)
    if nodes % 1024:
        raise SystemExit("ft: above 2048 nodes, P must be a multiple of 1024 nodes")
    return "3;32,32,%d;1,32,32;1,1,1" % (nodes // 1024)


def dragonfly(nodes):
    """groups,links;chassis,links;routers,links;nodes-per-router."""
    per_router = min(8, nodes)
    routers = max(1, min(16, nodes // per_router))
    chassis = max(1, min(4, nodes // (per_router * routers)))
    groups = max(1, nodes // (per_router * routers * chassis))
    if groups * chassis * routers * per_router != nodes:
        raise SystemExit("df1: %d nodes do not fill whole routers, chassis and groups" % nodes)
    return "%d,2;%d,2;%d,1;%d" % (groups, chassis, routers, per_router)


def write(kind, p, outdir):
    os.makedirs(outdir, exist_ok=True)
    xml = os.path.join(outdir, "%s-%d.xml" % (kind, p))
    hosts = os.path.join(outdir, "%s-%d.hosts" % (kind, p))
    head = ("<?xml version='1.0'?>\n"
            "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
            "<platform version=\"4.1\">\n")
    if kind == "shm2":
        body = ('  <cluster id="shm" prefix="node-" suffix="" radical="0-0" speed="%s" core="2"\n'
                '           bw="%s" lat="%s" loopback_bw="%s" loopback_lat="%s"/>\n'
                % (SPEED, LINK_BW, LINK_LAT, SHM_BW, SHM_LAT))
        names = ["node-0"] * p
    elif kind in ("ft1", "ft8"):
        per = 1 if kind == "ft1" else 8
        nodes = max(1, p // per)
        body = ('  <cluster id="ft" prefix="node-" suffix="" radical="0-%d" speed="%s" core="%d"\n'
                '           bw="%s" lat="%s" sharing_policy="SPLITDUPLEX"\n'
                '           loopback_bw="%s" loopback_lat="%s"\n'
                '           topology="FAT_TREE" topo_parameters="%s"/>\n'
                % (nodes - 1, SPEED, min(per, p), LINK_BW, LINK_LAT, SHM_BW, SHM_LAT,
                   fat_tree(nodes)))
        names = ["node-%d" % (r // per) for r in range(p)]
    elif kind == "df1":
        body = ('  <cluster id="df" prefix="node-" suffix="" radical="0-%d" speed="%s"\n'
                '           bw="%s" lat="%s" sharing_policy="SPLITDUPLEX"\n'
                '           topology="DRAGONFLY" topo_parameters="%s"/>\n'
                % (p - 1, SPEED, LINK_BW, LINK_LAT, dragonfly(p)))
        names = ["node-%d" % r for r in range(p)]
    else:
        raise SystemExit("platform.py: unknown kind '%s' (shm2, ft1, ft8, df1)" % kind)
    with open(xml, "w") as f:
        f.write(head + body + "</platform>\n")
    with open(hosts, "w") as f:
        f.write("\n".join(names) + "\n")
    return xml, hosts


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    for path in write(sys.argv[1], int(sys.argv[2]), sys.argv[3]):
        print(path)
