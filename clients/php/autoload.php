<?php

/**
 * The client's autoloader for applications without Composer: `require 'path/to/autoload.php';`
 * maps the `Veil\` namespace onto `src/` (PSR-4), as Composer's autoloader does.
 */

declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    $prefix = 'Veil\\';
    if (strncmp($class, $prefix, strlen($prefix)) !== 0) {
        return;
    }
    $relative = substr($class, strlen($prefix));
    $file = __DIR__ . '/src/' . str_replace('\\', '/', $relative) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
