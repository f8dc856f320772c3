/* no_symbol.c: a shared library that is no kernel library (no pb_kernel_table_get):
 * --kernels must refuse it with exit 2 naming the missing symbol. */
int pb_not_the_table(void) { return 42; }
