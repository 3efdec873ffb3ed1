"""The env contract: ``VLAEnv`` (``env``), the spaces (``schema``, ``instruction_space``), the episode
contract (``episodes``), the id table (``registry``), ``make`` and errors that name their fix.

Every other part of vla_gym builds on these modules; they import no simulator.
"""
