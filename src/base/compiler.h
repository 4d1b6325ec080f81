/* compiler.h -- the few compiler attributes the project relies on.
 *
 * GP_MUST_USE marks a fallible function (int 0 / -1, or a result enum): a
 * caller that drops the result gets a warning, which -Werror makes an
 * error. Casting the call to (void) does NOT silence it (GCC), so a caller
 * that really has nothing to do on failure says why and tests the result. */
#ifndef GP_COMPILER_H
#define GP_COMPILER_H

#define GP_MUST_USE __attribute__((warn_unused_result))

#endif
