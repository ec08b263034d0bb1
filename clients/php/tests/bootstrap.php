<?php

/**
 * PHPUnit bootstrap: the client's autoloader (no Composer needed), one for the tests'
 * namespace, and a real `veil serve` for the whole run (VEIL_BIN: the veil executable), stopped
 * at shutdown whatever the tests do.
 */

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

spl_autoload_register(static function (string $class): void {
    $prefix = 'Veil\\Tests\\';
    if (str_starts_with($class, $prefix)) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

$veil = getenv('VEIL_BIN');
if ($veil === false || $veil === '' || !is_executable($veil)) {
    fwrite(STDERR, "VEIL_BIN must name the veil executable, e.g. VEIL_BIN=\$PWD/.venv/bin/veil "
        . "phpunit --configuration clients/php/phpunit.xml (make phptest sets it)\n");
    exit(2);
}

$started = microtime(true);
$server = Veil\Tests\Support\VeilServer::start($veil);
fwrite(STDERR, sprintf("veil serve ready at %s in %.1f s\n", $server->baseUrl, microtime(true) - $started));
