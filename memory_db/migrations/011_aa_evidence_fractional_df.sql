-- A/A evidence whose service rates were stated at one host speed with an exponent fitted on the same
-- sweeps (loadgen.host_elasticity) keeps K - 1 degrees of freedom less what the fit took: a fraction.
ALTER TABLE aa_evidence ALTER COLUMN df SET DATA TYPE DOUBLE;
