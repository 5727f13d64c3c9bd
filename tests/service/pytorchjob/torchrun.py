# torchrun as a PyTorchJob image carries it, for Debian 12's python3-torch
# (1.13 on Python 3.11), whose torchrun fails at start: Std.from_str returns
# None there (on 3.11, iterating an IntFlag skips NONE and ALL). This replaces
# that one function with Std(int(v)) and runs the real torch.distributed.run,
# which reads its flags from the PET_ variables kilnd sets.
import re
import runpy
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(vm):
    if re.match(api._VALUE_REGEX, vm):
        return api.Std(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): api.Std(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError("%r does not match %s or %s" % (vm, api._VALUE_REGEX, api._MAPPING_REGEX))


api.Std.from_str = staticmethod(_from_str)
sys.argv[0] = "torchrun"
runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
